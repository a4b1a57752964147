import './boot' // first: the first page's API calls go out before the rest of the script runs
import { render } from 'preact'
import { App } from './app'
import './styles.css'

render(<App />, document.getElementById('app')!)
